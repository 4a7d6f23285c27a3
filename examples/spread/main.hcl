# Spread: an object detector that must survive the loss of a host runs one
# replica per host (distinct_host) on small single-GPU hosts, while a batch
# embedder beside it is bin-packed onto as few GPUs as possible.
#
#   cargo run -p gpushare -- apply --auto-approve examples/spread

gpushare {
  cluster = "spread"
}

# The hosts are Spot instances (docs/ec2-iam.md, "Spot pools"): the detector
# survives an interruption as it survives any lost host. When EC2 has no Spot
# capacity for g6.2xlarge, a launch falls back to g6.4xlarge (same single L4).
capacity_provider "edge" {
  instance_type  = "g6.2xlarge"
  instance_types = ["g6.4xlarge"]
  market         = "spot"
  max_price      = "0.60"
  min_size       = 1
  max_size       = 6
}

task_definition "detector" {
  container "server" {
    image  = "ghcr.io/example/yolo-detector:8.1"
    cpu    = 2048
    memory = 4096
    gpu {
      mps {
        memory              = 3072
        max_compute_percent = 30
      }
    }
  }
}

task_definition "batch-embedder" {
  container "worker" {
    image  = "ghcr.io/example/embedder:1.4"
    cpu    = 1024
    memory = 2048
    gpu {
      mps {
        memory = 2048
      }
    }
  }
}

service "detector" {
  task_definition    = task_definition.detector
  capacity_provider  = capacity_provider.edge
  desired_count      = 3
  placement_strategy = "spread"
  distinct_host      = true
}

service "batch-embedder" {
  task_definition    = task_definition.batch-embedder
  capacity_provider  = capacity_provider.edge
  desired_count      = 2
  placement_strategy = "binpack"
}
