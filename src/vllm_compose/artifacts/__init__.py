"""Things people install from a composed tree: the overlay wheel (`wheel`) and the precompiled editable install
(`editable`)."""
