"""Measurements the checks are calibrated by: parity's false-alarm rate, which every report quotes at its own
tolerance (``parity_false_alarm``; its results file is read at run time by chaos/false_alarm.py and
shipped in the image), and the study behind parity's band over seeds (``parity_pairing``).
docs/scenarios-and-checks.md."""
