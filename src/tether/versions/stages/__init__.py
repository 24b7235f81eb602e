"""The gate's stages, each with its config: offline and simulation run in the learner
before a candidate is published, shadow and canary in the server after."""
