"""Open Memory, the species: the commons node and the wire format its peers share."""

__version__ = "0.1.0"
