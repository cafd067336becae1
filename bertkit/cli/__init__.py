"""The `bertkit` command line (`bertkit.cli.main:main`), generated from each command's options
dataclasses. Nothing in the library imports this package."""
