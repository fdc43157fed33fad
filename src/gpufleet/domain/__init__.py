"""Pure rules of the fleet: states, transitions, matching, records. No I/O here."""
