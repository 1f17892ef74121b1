package cluster

import "k8s.io/apimachinery/pkg/api/resource"

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }
