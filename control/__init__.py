"""The policy tick (estimator -> policy runtime -> safety gate) that the deploy loop, the compute benchmark and eval
run: one room above the estimator, policies and safety, below deploy and eval."""
