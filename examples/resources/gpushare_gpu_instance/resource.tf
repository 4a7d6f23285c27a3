resource "gpushare_gpu_instance" "reserved_1" {
  name              = "reserved_1"
  capacity_provider = gpushare_capacity_provider.l4.name
  availability_zone = "us-east-1a"
}
