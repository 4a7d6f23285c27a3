# Sweep: an AV/ADAS simulation sweep of 20 scenarios, 5 at once, each run a
# share of an L4 with MPS, beside a perception service that keeps running. The
# runs take the GPU room the service leaves; the pool grows for them and shrinks
# back once they finish (docs/jobs.md).
#
#   cargo run -p gpushare -- plan examples/sweep
#   gpushare job status sweep

gpushare {
  cluster = "sweep"
}

capacity_provider "l4" {
  instance_type = "g6.12xlarge"
  min_size      = 1
  max_size      = 3
}

task_definition "perception" {
  container "server" {
    image  = "ghcr.io/example/perception:2.3"
    cpu    = 2048
    memory = 4096
    gpu {
      mps {
        memory = 8192
      }
    }
  }
}

task_definition "simulate" {
  container "sim" {
    image = "ghcr.io/example/av-sim:0.9"
    # GPUSHARE_JOB_INDEX (0..19) picks the scenario.
    command = ["/bin/sh", "-c", "exec simulate --scenario \"$GPUSHARE_JOB_INDEX\" --of \"$GPUSHARE_JOB_COMPLETIONS\""]
    cpu     = 4096
    memory  = 16384
    gpu {
      mps {
        memory              = 10240
        max_compute_percent = 50
      }
    }
  }
}

service "perception" {
  task_definition   = "perception"
  capacity_provider = "l4"
  desired_count     = 2
}

job "sweep" {
  task_definition      = "simulate"
  capacity_provider    = "l4"
  completions          = 20
  parallelism          = 5
  max_retries          = 2
  timeout_seconds      = 3600
  indexed              = true
  expected_run_seconds = 900
}
