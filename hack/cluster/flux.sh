# Flux for the GitOps tests (sourced by up.sh / down.sh / status.sh): source-controller and kustomize-controller
# built from their Go modules (`hack/cluster/build.sh flux`, wrapper modules: their go.mod files have replace
# directives), run out of cluster like the other operators, their CRDs from the same modules, and a git server on
# loopback (git_server.py: `git http-backend`) that the tests push to.
# Started only when asked (GRPO_FLUX=1: up.sh starts them, failing when they are not built): only the GitOps tests
# need them, so every other run of up.sh spares their CPU. Stopped by down.sh with the rest.
FLUX_DIR="$CLUSTER_DIR/flux"
GIT_ROOT="$FLUX_DIR/git"                     # bare repositories served at http://127.0.0.1:$GIT_PORT/<name>.git
FLUX_NS=flux-system

flux_built() { [ -x "$FLUX_BIN/source-controller" ] && [ -x "$FLUX_BIN/kustomize-controller" ]; }

flux_wanted() {
  [ "${GRPO_FLUX:-}" = 1 ] || return 1
  flux_built || { echo "GRPO_FLUX=1 but Flux is not built: run 'hack/cluster/build.sh flux' (make cluster-bins)" >&2; exit 1; }
}

flux_ok() {
  pid_alive git-server && http_ok "http://127.0.0.1:$GIT_PORT/healthz" &&
    pid_alive source-controller && http_ok "http://127.0.0.1:$FLUX_SOURCE_HEALTH_PORT/readyz" &&
    pid_alive kustomize-controller && http_ok "http://127.0.0.1:$FLUX_KUSTOMIZE_HEALTH_PORT/readyz"
}

flux_up() {
  local t0 ssrc ksrc
  t0=$(date +%s)
  ssrc=$(moddir "github.com/fluxcd/source-controller@$FLUX_SOURCE_VERSION")
  ksrc=$(moddir "github.com/fluxcd/kustomize-controller@$FLUX_KUSTOMIZE_VERSION")
  mkdir -p "$GIT_ROOT" "$FLUX_DIR/storage"
  k create namespace "$FLUX_NS" --dry-run=client -o yaml | k apply -f - >/dev/null
  k apply --server-side --force-conflicts --field-manager=grpo-cluster -f "$ssrc/config/crd/bases" \
    -f "$ksrc/config/crd/bases" >/dev/null
  k wait --for=condition=Established --timeout=60s crd/gitrepositories.source.toolkit.fluxcd.io \
    crd/kustomizations.kustomize.toolkit.fluxcd.io >/dev/null
  if ! pid_alive git-server; then
    cp "$HERE/git_server.py" "$CLUSTER_DIR/bin/git_server.py"
    start_bg git-server python3 "$CLUSTER_DIR/bin/git_server.py" "$GIT_ROOT" "$GIT_PORT"
    wait_ready git-server "http://127.0.0.1:$GIT_PORT/healthz"
  fi
  if ! pid_alive source-controller; then
    ln -sfn "$FLUX_BIN/source-controller" "$CLUSTER_DIR/bin/source-controller"
    # the artifact server on loopback, advertised as such: kustomize-controller (on the host too) downloads from it
    KUBECONFIG="$KUBECONFIG_PATH" RUNTIME_NAMESPACE=$FLUX_NS start_bg source-controller "$CLUSTER_DIR/bin/source-controller" \
      --metrics-addr="127.0.0.1:$FLUX_SOURCE_METRICS_PORT" --health-addr="127.0.0.1:$FLUX_SOURCE_HEALTH_PORT" \
      --storage-path="$FLUX_DIR/storage" --storage-addr="127.0.0.1:$FLUX_STORAGE_PORT" \
      --storage-adv-addr="127.0.0.1:$FLUX_STORAGE_PORT" --enable-leader-election=false --log-encoding=console
    wait_ready source-controller "http://127.0.0.1:$FLUX_SOURCE_HEALTH_PORT/readyz"
  fi
  if ! pid_alive kustomize-controller; then
    ln -sfn "$FLUX_BIN/kustomize-controller" "$CLUSTER_DIR/bin/kustomize-controller"
    KUBECONFIG="$KUBECONFIG_PATH" RUNTIME_NAMESPACE=$FLUX_NS start_bg kustomize-controller "$CLUSTER_DIR/bin/kustomize-controller" \
      --metrics-addr="127.0.0.1:$FLUX_KUSTOMIZE_METRICS_PORT" --health-addr="127.0.0.1:$FLUX_KUSTOMIZE_HEALTH_PORT" \
      --enable-leader-election=false --no-remote-bases=true --log-encoding=console
    wait_ready kustomize-controller "http://127.0.0.1:$FLUX_KUSTOMIZE_HEALTH_PORT/readyz"
  fi
  say "flux source-controller $FLUX_SOURCE_VERSION + kustomize-controller $FLUX_KUSTOMIZE_VERSION, git server :$GIT_PORT ready ($(( $(date +%s) - t0 ))s)"
}

flux_down() { stop_pid kustomize-controller; stop_pid source-controller; stop_pid git-server; }

flux_status() {
  local n
  for n in git-server source-controller kustomize-controller; do
    if pid_alive $n; then echo "$(printf '%-21s' $n:) running pid $(cat "$PIDS/$n.pid") (log $LOGS/$n.log)"
    else echo "$(printf '%-21s' $n:) not running (started by up.sh with GRPO_FLUX=1)"; fi
  done
}
