"""Per-target recipes (smol, ling3) and their READMEs (issue 3)."""
