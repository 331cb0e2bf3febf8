"""Training side: MJX G1 environment, BCG, rollouts, SHAC, motions, export."""
