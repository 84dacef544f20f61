module gpushare.dev/hack/runtime/pause

go 1.26.0
