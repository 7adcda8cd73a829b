"""Pure diff helpers (no sandbox, no I/O): the paths and hunks of a unified diff, filtering and
reversing patches. A leaf: task rows, converters and the grader all use it."""
