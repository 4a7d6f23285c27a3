resource "gpushare_capacity_provider" "l4" {
  name          = "l4"
  instance_type = "g6.12xlarge"
  min_size      = 0
  max_size      = 4

  mps {
    default_active_thread_percentage = 100
  }

  tags = {
    team = "ml-platform"
  }
}
