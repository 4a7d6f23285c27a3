# A gpushare_task_definition is imported by its name.
terraform import gpushare_task_definition.NAME NAME
