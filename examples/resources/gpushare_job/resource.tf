resource "gpushare_job" "embed_corpus" {
  name                 = "embed_corpus"
  task_definition      = gpushare_task_definition.embedder.name
  capacity_provider    = gpushare_capacity_provider.l4.name
  completions          = 20
  parallelism          = 5
  max_retries          = 2
  timeout_seconds      = 3600
  indexed              = true
  expected_run_seconds = 600
}
