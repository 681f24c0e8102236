// CoreDNS for the local cluster's real node, built from the github.com/coredns/coredns module with only the
// plugins a cluster DNS needs (the upstream binary compiles ~60 plugins, cloud SDKs included: minutes more on
// 2 cores). The registration mirrors coredns.go + core/plugin/zplugin.go upstream; dnsserver.Directives (the
// plugin order) stays upstream's.
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

func main() { coremain.Run() }
