"""Subcommands of the ``specbayes`` CLI that belong to no single subpackage."""
