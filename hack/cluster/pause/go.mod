module grpo-launcher/hack/cluster/pause

go 1.26
