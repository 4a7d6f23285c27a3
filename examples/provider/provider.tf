provider "gpushare" {
  cluster = "inference"
  cloud   = "local"
}
