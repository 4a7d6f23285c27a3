# Mixed: a fine-tuning job that needs two whole GPUs of its own, next to small
# MPS services sharing the remaining GPUs of the same 4-GPU host. A GPU in MPS
# mode only takes MPS tasks; a dedicated GPU takes exactly one task.
#
#   cargo run -p gpushare -- apply --auto-approve examples/mixed

gpushare {
  cluster = "mixed"
}

capacity_provider "a10g" {
  instance_type = "g5.12xlarge"
  min_size      = 0
  max_size      = 2
}

task_definition "finetune" {
  container "trainer" {
    image   = "ghcr.io/example/lora-trainer:0.9"
    command = ["train", "--config", "/etc/train/lora.yaml"]
    cpu     = 16384
    memory  = 65536
    gpu {
      count = 2
    }
  }
}

task_definition "embedder" {
  container "server" {
    image  = "ghcr.io/example/embedder:1.4"
    cpu    = 2048
    memory = 4096
    gpu {
      mps {
        memory              = 4096
        max_compute_percent = 20
      }
    }
  }
}

task_definition "ocr" {
  container "server" {
    image  = "ghcr.io/example/ocr:3.2"
    cpu    = 2048
    memory = 4096
    gpu {
      mps {
        memory = 5120
      }
    }
  }
  container "sidecar" {
    image  = "ghcr.io/example/metrics-exporter:1.0"
    cpu    = 256
    memory = 256
  }
}

service "finetune" {
  task_definition   = task_definition.finetune
  capacity_provider = capacity_provider.a10g
  desired_count     = 1
}

service "embedder" {
  task_definition   = task_definition.embedder
  capacity_provider = capacity_provider.a10g
  desired_count     = 5
}

service "ocr" {
  task_definition   = task_definition.ocr
  capacity_provider = capacity_provider.a10g
  desired_count     = 3
}
