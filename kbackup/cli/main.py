"""The ``kafka-backup`` entry point and its single error handler.

Every error leaves the process here: a project error prints one line naming
what went wrong (plus the next step when there is one) and exits with its
documented code; anything else is a bug, shown with a traceback only under
``--debug``. Secrets are redacted from everything printed.
"""

from __future__ import annotations

import json
import sys
import traceback

from kbackup.core.errors import ConfigError, InterruptedByUser, KBackupError, UsageError
from kbackup.core.secrets import redact

PROG = "kafka-backup"


def _click_exception_types() -> tuple[tuple[type[BaseException], ...], ...]:
    """(Exit, ClickException, Abort): typer's public exits, and the base of click's refusals found
    from typer's public BadParameter, whichever click typer runs on (its own copy since 0.20)."""
    import typer

    click_error = next(cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "ClickException")
    return (typer.Exit,), (click_error,), (typer.Abort,)


def _asks_for_json(args: list[str]) -> bool:
    """Whether the command line gives ``--json``. It is each command's own option, not a global
    one, and a refusal while parsing (an unknown option) comes before any option is parsed: so
    the words are read, those before ``--`` (after it, ``--json`` is an argument)."""
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _command_path(args: list[str]) -> str:
    """``kafka-backup`` and the (sub)command words found in ``args``, for the help to point to."""
    import typer

    from kbackup.cli.app import app

    command: object = typer.main.get_command(app)
    words = [PROG]
    for arg in args:
        commands = getattr(command, "commands", None)
        if not isinstance(commands, dict):
            break
        if arg in commands:
            words.append(arg)
            command = commands[arg]
    return " ".join(words)


def click_error(exc: BaseException, args: list[str]) -> KBackupError | None:
    """click's own refusal as the project's error, so it is reported like every other one (one
    line, a next step, the JSON error under --json); None for the help that a command without
    arguments prints, which is no error to report.

    The rule of docs/exit-codes.md: an option's value that click cannot take (not a number, out
    of its range) is a wrong value, exit 3 like any other; an unknown option, a missing option or
    value, or a stray argument is how the command was called, exit 2.
    """
    if type(exc).__name__ == "NoArgsIsHelpError":
        return None
    message = exc.format_message().rstrip(".") if hasattr(exc, "format_message") else str(exc)
    context = getattr(exc, "ctx", None)
    command = getattr(context, "command_path", None) or _command_path(args)
    hint = f"'{command} --help' lists its " + ("options" if command != PROG else "commands and options")
    kinds = {cls.__name__ for cls in type(exc).__mro__}
    bad_value = "BadParameter" in kinds and "MissingParameter" not in kinds
    if bad_value:
        return ConfigError(message, hint=hint)
    return UsageError(message, hint=hint)


def report_error(error: KBackupError, *, as_json: bool) -> None:
    if as_json:
        payload = {
            **error.json_context,
            "error": {
                "kind": error.kind,
                "message": error.message,
                "hint": error.hint,
                "retryable": error.retryable,
                "exit_code": error.exit_code,
            },
        }
        print(redact(json.dumps(payload, indent=2)))
    first, _, rest = error.message.partition("\n")
    print(redact(f"{PROG}: error: {first}"), file=sys.stderr)
    if rest:
        print(redact(rest), file=sys.stderr)
    next_step = error.hint or ""
    if error.retryable:
        next_step = (next_step + "; " if next_step else "") + "running the same command again may succeed"
    if next_step:
        print(redact(f"{PROG}: next step: {next_step}"), file=sys.stderr)


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return the exit code instead of exiting (used by tests and ``main``)."""
    from kbackup.cli.app import GlobalOptions, app

    args = list(sys.argv[1:] if argv is None else argv)
    # The global options' callback fills this in (--debug before or after the command); an error
    # raised before it ran is click's own refusal, reported without a traceback either way.
    given = GlobalOptions()
    as_json = _asks_for_json(args)
    exit_types, click_error_types, abort_types = _click_exception_types()
    interrupt_types: tuple[type[BaseException], ...] = (*abort_types, KeyboardInterrupt)
    try:
        result = app(args=args, prog_name=PROG, standalone_mode=False, obj=given)
        return result if isinstance(result, int) else 0
    except exit_types as exc:
        return int(getattr(exc, "exit_code", 0))
    except click_error_types as exc:
        error = click_error(exc, args)
        if error is None:
            exc.show(file=sys.stderr)  # type: ignore[attr-defined]
            return int(getattr(exc, "exit_code", 2))
        report_error(error, as_json=as_json)
        return error.exit_code
    except interrupt_types:
        report_error(InterruptedByUser("interrupted"), as_json=as_json)
        return InterruptedByUser.exit_code
    except KBackupError as exc:
        if given.debug:
            # The error's message ends the traceback; a secret a lower layer put there is masked here
            # as in the one line report_error prints.
            print(redact(traceback.format_exc()), file=sys.stderr, end="")
        report_error(exc, as_json=as_json)
        return exc.exit_code
    except Exception as exc:
        if given.debug:
            print(redact(traceback.format_exc()), file=sys.stderr)
        else:
            print(redact(f"{PROG}: internal error: {type(exc).__name__}: {exc}"), file=sys.stderr)
            print(
                f"{PROG}: next step: run the same command again with --debug for the traceback, and report "
                f"it with `{PROG} --version` to the maintainers of your copy (README.md, "
                '"Reporting a problem")',
                file=sys.stderr,
            )
        return 1


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
