"""Stage 2, restore: replay a backup into a target cluster with origin headers."""
