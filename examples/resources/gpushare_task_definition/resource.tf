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
