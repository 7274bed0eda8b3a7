"""The errors of a run folder; each message names the file and the fix."""


class RunFolderError(RuntimeError):
    """A run folder whose content cannot be used as it is; the message names the file and the
    fix."""


class ConfigMismatchError(RunFolderError):
    pass


class RunLockedError(RunFolderError):
    pass
