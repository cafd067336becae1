"""The `bertkit` command line (`bertkit.cli.main:main`). Nothing in the library imports this package."""
