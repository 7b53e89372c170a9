"""Stage 4, reset: plan, execute and roll back consumer-group offset resets on the target."""
