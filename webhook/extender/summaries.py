"""Moved to core.placement.summaries (filter refreshes them in core, with no callback into the cache);
kept under the old name for its importers."""

from webhook.core.placement.summaries import KEPT_SIZES, Summaries

__all__ = ["KEPT_SIZES", "Summaries"]
