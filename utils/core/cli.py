"""The scripts' command-line parser: a mistake is one line and exit 2 (not argparse's usage block); an option is only
ever its whole name (argparse would take `--epoch 2` for `--epochs 2`); a misspelt one is told the names it is close
to, as a misspelt YAML key or space entry is."""

import argparse
import difflib

UNRECOGNIZED = "unrecognized arguments: "


class OneLineParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {self._with_close_names(message)} (see --help)\n")

    def _with_close_names(self, message):
        """argparse's "unrecognized arguments: ..." with the option names close to each unknown one."""
        if not message.startswith(UNRECOGNIZED):
            return message
        names = [name for name in self._option_string_actions if name.startswith("--")]
        hints = []
        for word in message[len(UNRECOGNIZED):].split():
            flag = word.split("=", 1)[0]
            close = difflib.get_close_matches(flag, names, n=3, cutoff=0.75) if flag.startswith("--") else []
            if close:
                hints.append(f"{flag}: did you mean {' or '.join(close)}?")
        return f"{message} ({'; '.join(hints)})" if hints else message
