"""Deploy runtime: DDS link, control loop and state machine, state estimator, sim bridge, logging."""
