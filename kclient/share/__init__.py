"""Share groups (KIP-932): membership, share sessions and acknowledgements."""
