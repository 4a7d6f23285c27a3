# gpushare quickstart: three small inference services packed onto shared GPUs.
#
#   cargo run -p gpushare -- apply --auto-approve examples/quickstart
#
# Runs on the embedded default: a simulated local fleet (no cloud account needed),
# state in examples/quickstart/.gpushare/.

gpushare {
  cluster = "quickstart"
  cloud   = "local"
}

variable "embedder_replicas" {
  default     = 6
  description = "Replicas of the text-embedding service"
}

locals {
  registry = "ghcr.io/example"
}

# One NVIDIA L4 (22888 MiB) per host, 16 vCPUs, 64 GiB.
capacity_provider "l4" {
  instance_type = "g6.4xlarge"
  min_size      = 0
  max_size      = 4
}

# One NVIDIA A10G per host, for the language model.
capacity_provider "a10g" {
  instance_type = "g5.4xlarge"
  min_size      = 0
  max_size      = 2
}

task_definition "embedder" {
  container "server" {
    image   = "${local.registry}/embedder:1.4"
    command = ["serve", "--model", "bge-small-en-v1.5", "--port", "8080"]
    cpu     = 2048
    memory  = 4096
    env = {
      MAX_BATCH = "64"
    }
    # Where clients reach it: the planner gives each task a host port (shown in the
    # plan); `gpushare endpoints embedder` lists them (docs/serving.md).
    port_mapping {
      name           = "http"
      container_port = 8080
    }
    gpu {
      mps {
        memory              = 4096
        max_compute_percent = 15
      }
    }
  }
}

task_definition "reranker" {
  container "server" {
    image  = "${local.registry}/reranker:2.0"
    cpu    = 2048
    memory = 8192
    gpu {
      mps {
        memory              = 6144
        max_compute_percent = 25
      }
    }
  }
}

task_definition "llm" {
  container "server" {
    image   = "${local.registry}/vllm-qwen2.5-3b:0.6"
    command = ["--max-model-len", "8192", "--quantization", "awq"]
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

service "embedder" {
  task_definition    = task_definition.embedder
  capacity_provider  = capacity_provider.l4
  desired_count      = var.embedder_replicas
  placement_strategy = "binpack"
}

service "reranker" {
  task_definition   = task_definition.reranker
  capacity_provider = capacity_provider.l4
  desired_count     = 4
}

service "llm" {
  task_definition   = task_definition.llm
  capacity_provider = capacity_provider.a10g
  desired_count     = 2
}
