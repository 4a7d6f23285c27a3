# A gpushare_job is imported by its name.
terraform import gpushare_job.NAME NAME
