"""The fast word split of a shell command is shlex.split's, exactly (issue 23).

``pager.core.fileread`` splits a command without quotes or backslashes with a
regex instead of ``shlex``; which file a call reads (a page's key, staleness,
the bench) depends on those words, so they must be shlex's for every command.
"""

from __future__ import annotations

import shlex

from hypothesis import example, given, settings
from hypothesis import strategies as st
from sizes import examples

from pager.core import fileread
from pager.core.fileread import file_read_path


def shlex_words(command: str) -> list[str] | None:
    try:
        return shlex.split(command)
    except ValueError:
        return None


_BITS = st.sampled_from([
    " ", "  ", "\t", "\r", "\n", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u3000", "#", "#x", "cat", "sed", "-n",
    "'", '"', "\\", "\\ ", "'a b'", '"a b"', "a", "src/x.py", "~/p", "é", "$", "*", "=", ";", "", "\x00",
])


@settings(max_examples=examples(150, 500), deadline=None)
@given(command=st.lists(_BITS, max_size=12).map("".join) | st.text(max_size=60))
@example(command="cat a\x0bb")  # \x0b is whitespace to str.split, not to shlex
@example(command="cat a\xa0b")
@example(command="cat #comment")  # shlex.split keeps '#' words (comments=False)
@example(command="cat\ta\r b ")
def test_prop_the_words_are_shlexs(command: str) -> None:
    assert fileread._words(command) == shlex_words(command)


def test_a_read_command_reads_the_same_path_either_way() -> None:
    cases = {"cat src/app.py": "src/app.py", "cat  src/app.py ": "src/app.py", "tail\t-5\tlog.txt": "log.txt",
             "sed -n 10,20p a.py": "a.py#L10-20", "cat 'a b.py'": "a b.py", "cat a\\ b.py": "a b.py",
             "cat 'open": None, "cat a.py b.py": None}
    for command, path in cases.items():
        assert file_read_path("bash", {"command": command}) == path, command
