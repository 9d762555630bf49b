// Command kube-controllers runs the controllers of kube-controller-manager that the test control
// plane needs: the garbage collector (owned objects go with their owners), the namespace
// controller (a deleted namespace is emptied, then removed) and the EndpointSlice controller (a
// Service's ready pods, which cluster DNS answers for a headless Service and kube-proxy routes
// to). All are upstream's own code from the release pinned in go.mod, wired as
// kube-controller-manager wires them (cmd/kube-controller-manager/app: CreateControllerContext,
// startGarbageCollectorController, startNamespaceController, startEndpointSliceController) with
// its default settings; what is left out is every other controller, which would compile about
// 300 packages more and run nothing here.
//
//	kube-controllers --kubeconfig=FILE --healthz-port=PORT [-v=N]
//
// GET http://127.0.0.1:PORT/healthz answers "ok" once both controllers run.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	endpointslicecontroller "k8s.io/kubernetes/pkg/controller/endpointslice"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
)

// kube-controller-manager's defaults (cmd/kube-controller-manager/app/options).
const (
	apiQPS              = 20
	apiBurst            = 30
	resync              = 12 * time.Hour // --min-resync-period; upstream picks between it and twice it
	gcWorkers           = 20             // --concurrent-gc-syncs
	gcSyncPeriod        = 30 * time.Second
	namespaceWorkers    = 10              // --concurrent-namespace-syncs
	namespaceSyncPeriod = 5 * time.Minute // --namespace-sync-period
	sliceWorkers        = 5               // --concurrent-service-endpoint-syncs
	maxPerSlice         = 100             // --max-endpoints-per-slice
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server to work against")
	port := flag.Int("healthz-port", 0, "port on 127.0.0.1 of the /healthz endpoint (0: none)")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "kube-controllers: --kubeconfig is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *port); err != nil {
		klog.ErrorS(err, "kube-controllers stopped")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

// clients for one controller, as kube-controller-manager's client builder makes them: a user agent
// of its own, and kube-controller-manager's default request rate times qps and burst.
func clients(kubeconfig, agent string, qps float32, burst int) (*kubernetes.Clientset, metadata.Interface, error) {
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	c.QPS, c.Burst = apiQPS*qps, apiBurst*burst
	c = rest.AddUserAgent(c, agent)
	typed, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, nil, err
	}
	metadataOnly, err := metadata.NewForConfig(c)
	return typed, metadataOnly, err
}

func run(ctx context.Context, kubeconfig string, port int) error {
	var ready atomic.Bool
	if port != 0 {
		listener, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if !ready.Load() {
				http.Error(w, "starting", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		go func() { _ = http.Serve(listener, mux) }()
	}

	// CreateControllerContext: shared informers (typed and metadata-only, managed fields trimmed)
	// and a RESTMapper from discovery, reset every 30 s so that new kinds are found.
	client, metadataClient, err := clients(kubeconfig, "shared-informers", 1, 1)
	if err != nil {
		return err
	}
	trim := func(obj interface{}) (interface{}, error) {
		if accessor, err := meta.Accessor(obj); err == nil && accessor.GetManagedFields() != nil {
			accessor.SetManagedFields(nil)
		}
		return obj, nil
	}
	sharedInformers := informers.NewSharedInformerFactoryWithOptions(
		client, resync, informers.WithTransform(trim))
	metadataInformers := metadatainformer.NewSharedInformerFactoryWithOptions(
		metadataClient, resync, metadatainformer.WithTransform(trim))
	restMapper := restmapper.NewDeferredDiscoveryRESTMapper(
		memory.NewMemCacheClient(client.Discovery()))
	go wait.Until(restMapper.Reset, 30*time.Second, ctx.Done())
	informersStarted := make(chan struct{})

	// startGarbageCollectorController: each deletion takes two requests, so twice the rate.
	gcClient, gcMetadata, err := clients(kubeconfig, "generic-garbage-collector", 2, 1)
	if err != nil {
		return err
	}
	graph := garbagecollector.NewDependencyGraphBuilder(ctx, metadataClient, restMapper,
		garbagecollector.DefaultIgnoredResources(),
		informerfactory.NewInformerFactory(sharedInformers, metadataInformers), informersStarted)
	gc, err := garbagecollector.NewComposedGarbageCollector(
		ctx, gcClient, gcMetadata, restMapper, graph)
	if err != nil {
		return fmt.Errorf("the garbage collector could not start: %w", err)
	}
	go gc.Run(ctx, gcWorkers, gcSyncPeriod)
	go gc.Sync(ctx, gcClient.Discovery(), gcSyncPeriod)

	// startNamespaceController: many discovery and delete requests, so a higher rate.
	nsClient, nsMetadata, err := clients(kubeconfig, "namespace-controller", 20, 100)
	if err != nil {
		return err
	}
	namespaces := namespacecontroller.NewNamespaceController(ctx, nsClient, nsMetadata,
		nsClient.Discovery().ServerPreferredNamespacedResources,
		sharedInformers.Core().V1().Namespaces(), namespaceSyncPeriod, v1.FinalizerKubernetes)
	go namespaces.Run(ctx, namespaceWorkers)

	// startEndpointSliceController, updates not batched (--endpoint-updates-batch-period 0).
	sliceClient, _, err := clients(kubeconfig, "endpointslice-controller", 1, 1)
	if err != nil {
		return err
	}
	slices := endpointslicecontroller.NewController(ctx,
		sharedInformers.Core().V1().Pods(), sharedInformers.Core().V1().Services(),
		sharedInformers.Core().V1().Nodes(), sharedInformers.Discovery().V1().EndpointSlices(),
		maxPerSlice, sliceClient, 0)
	go slices.Run(ctx, sliceWorkers)

	sharedInformers.Start(ctx.Done())
	metadataInformers.Start(ctx.Done())
	close(informersStarted)
	ready.Store(true)
	klog.InfoS("kube-controllers running: garbage collector, namespace controller, " +
		"EndpointSlice controller")
	<-ctx.Done()
	return nil
}
