"""Handling of received mail messages."""
