-- The quick start's recipe: load the small synthetic llama that `qload synth` writes to
-- build/tiny-llama (see README) into host memory.
return qload.recipe {
  source  = "../../build/tiny-llama",  -- relative to this file
  devices = "cpu",
  io      = { engine = "auto", queue_depth = 16, chunk = "8MiB", staging = "128MiB" },
}
