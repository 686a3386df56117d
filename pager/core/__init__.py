"""Values and pure logic, no I/O. Importing the package registers every shipped heat policy."""

from pager.core import fitted as _fitted  # noqa: F401 - registers the "fitted" heat policy
