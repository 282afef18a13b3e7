"""Sensors: wait for the nightly training record."""
