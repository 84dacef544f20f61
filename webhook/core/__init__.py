"""Pure domain code, in rooms named for what they decide (docs/architecture.md): wire <- specs <- placement
<- node <- usage | admission, and pki beside them. No I/O, no frameworks; import-linter enforces both."""
