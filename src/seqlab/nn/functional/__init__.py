"""Pure functions under the modules of ``seqlab.nn``: recurrence steps and attention (full, local, linear, masks)."""
