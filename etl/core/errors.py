"""The error every bad setting raises (its own module so the registry and the configuration share it)."""


class ConfigError(ValueError):
    """A setting is missing, malformed or out of range; the message names the setting."""
