"""Stage 3, mapping: a Spark job that turns restored records' origin headers into offset ranges."""
