"""The three-phase restore and the disaster-recovery drill, built on the four stages."""
