"""The application layer: the whole-file config, command-line flags over it, and the runs that use
several stages together (three-phase restore, the disaster-recovery drill). Never imports typer."""
