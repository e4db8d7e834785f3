"""The root exception of perfetto_smb."""


class SmbError(Exception):
    """Base class of every error raised by perfetto_smb."""
