"""libFuzzer harnesses (atheris); see each module for how to run it."""
