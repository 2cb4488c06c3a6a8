"""The project's own tests, in folders that mirror the packages they test."""
