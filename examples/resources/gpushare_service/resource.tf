resource "gpushare_service" "embedder" {
  name               = "embedder"
  task_definition    = gpushare_task_definition.embedder.name
  capacity_provider  = gpushare_capacity_provider.l4.name
  desired_count      = 6
  placement_strategy = "binpack"

  deployment {
    max_surge_percent   = 50
    min_healthy_percent = 100
  }
}
