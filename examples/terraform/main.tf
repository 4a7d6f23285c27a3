# gpushare through Terraform: one pool of L4 hosts, an embedding service sharing
# GPUs through MPS, and a whole-GPU batch service.
#
# Runs as is with a dev_overrides CLI configuration (see README.md); no `terraform init`.

terraform {
  required_providers {
    gpushare = {
      source = "gpushare/gpushare"
    }
  }
}

variable "embedder_count" {
  type    = number
  default = 3
}

variable "l4_instance_type" {
  type    = string
  default = "g6.12xlarge"
}

provider "gpushare" {
  cluster   = "tf-example"
  state_dir = ".gpushare"
}

data "gpushare_instance_type" "l4" {
  name = var.l4_instance_type
}

resource "gpushare_capacity_provider" "l4" {
  name          = "l4"
  instance_type = var.l4_instance_type
  min_size      = 0
  max_size      = 4

  tags = {
    team = "ml-platform"
  }
}

resource "gpushare_task_definition" "embedder" {
  name = "embedder"

  container {
    name    = "server"
    image   = "ghcr.io/example/embedder:1.4"
    command = ["serve", "--port", "8080"]
    cpu     = 2048
    memory  = 4096

    env = {
      MODEL = "bge-small"
    }

    gpu {
      mps {
        memory              = 6144
        max_compute_percent = 25
      }
    }
  }
}

resource "gpushare_task_definition" "batch" {
  name = "batch"

  container {
    name   = "worker"
    image  = "ghcr.io/example/batch:2.0"
    cpu    = 4096
    memory = 16384

    gpu {
      count = 1
    }
  }
}

resource "gpushare_service" "embedder" {
  name              = "embedder"
  task_definition   = gpushare_task_definition.embedder.name
  capacity_provider = gpushare_capacity_provider.l4.name
  desired_count     = var.embedder_count
}

resource "gpushare_service" "batch" {
  name              = "batch"
  task_definition   = gpushare_task_definition.batch.name
  capacity_provider = gpushare_capacity_provider.l4.name
  desired_count     = 1
  distinct_host     = true
}

data "gpushare_placements" "embedder" {
  service = gpushare_service.embedder.name
}

output "embedder_placements" {
  value = gpushare_service.embedder.placements
}

output "l4_gpu_memory_mib" {
  value = data.gpushare_instance_type.l4.gpu_memory_mib
}

output "embedder_gpu_memory_mib" {
  value = data.gpushare_placements.embedder.gpu_memory_mib
}
