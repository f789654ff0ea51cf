"""The error every weights reader raises (kept apart so that any module can import it)."""


class WeightsError(ValueError):
    """A weights file or directory is missing, unreadable, incomplete or inconsistent."""
