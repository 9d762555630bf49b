// Command kube-controllers runs the controllers of kube-controller-manager that the test control
// plane needs: the garbage collector (owned objects go with their owners), the namespace
// controller (a deleted namespace is emptied, then removed) and the EndpointSlice controller (a
// Service's ready pods, which cluster DNS answers for a headless Service and kube-proxy routes
// to). With --pods, for a control plane whose nodes run pods: the ServiceAccount controller (each
// namespace's `default` account, which the ServiceAccount admission plugin gives a pod that names
// none), the root CA publisher (the kube-root-ca.crt ConfigMap of each namespace, which a pod's
// service-account volume mounts as ca.crt), the node lifecycle controller (which lifts the
// not-ready taint a node is admitted with once it is Ready, and taints a node that stops
// answering), the ReplicaSet and Deployment controllers, and the PersistentVolume binder. All
// are upstream's own code from the release pinned in go.mod, wired as kube-controller-manager
// wires them (cmd/kube-controller-manager/app: CreateControllerContext, the start function of
// each) with its default settings; what is left out is every other controller, which would
// compile hundreds of packages more and run nothing here.
//
//	kube-controllers --kubeconfig=FILE --healthz-port=PORT [--pods --root-ca-file=FILE] [-v=N]
//
// GET http://127.0.0.1:PORT/healthz answers "ok" once every controller runs.
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
	"k8s.io/kubernetes/pkg/controller/certificates/rootcacertpublisher"
	"k8s.io/kubernetes/pkg/controller/deployment"
	endpointslicecontroller "k8s.io/kubernetes/pkg/controller/endpointslice"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
	lifecyclecontroller "k8s.io/kubernetes/pkg/controller/nodelifecycle"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	serviceaccountcontroller "k8s.io/kubernetes/pkg/controller/serviceaccount"
	"k8s.io/kubernetes/pkg/controller/volume/persistentvolume"
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

	// With --pods.
	nodeMonitorPeriod     = 5 * time.Second  // --node-monitor-period
	nodeStartupGrace      = 60 * time.Second // --node-startup-grace-period
	nodeMonitorGrace      = 50 * time.Second // --node-monitor-grace-period
	evictionRate          = 0.1              // --node-eviction-rate
	secondaryEvictionRate = 0.01             // --secondary-node-eviction-rate
	largeClusterSize      = 50               // --large-cluster-size-threshold
	unhealthyZoneShare    = 0.55             // --unhealthy-zone-threshold
	replicaSetWorkers     = 5                // --concurrent-replicaset-syncs
	deploymentWorkers     = 5                // --concurrent-deployment-syncs
	claimSyncPeriod       = 15 * time.Second // --pvclaimbinder-sync-period
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server to work against")
	port := flag.Int("healthz-port", 0, "port on 127.0.0.1 of the /healthz endpoint (0: none)")
	pods := flag.Bool("pods", false, "also run the controllers of a cluster whose nodes run pods")
	rootCA := flag.String("root-ca-file", "", "the cluster's CA certificate, which --pods publishes")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || (*pods && *rootCA == "") {
		fmt.Fprintln(os.Stderr, "kube-controllers: --kubeconfig is required, and --root-ca-file with --pods")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *port, *pods, *rootCA); err != nil {
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

func run(ctx context.Context, kubeconfig string, port int, pods bool, rootCAFile string) error {
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

	running := "garbage collector, namespace controller, EndpointSlice controller"
	if pods {
		if err := startPodControllers(ctx, kubeconfig, rootCAFile, sharedInformers); err != nil {
			return err
		}
		running += ", ServiceAccount controller, root CA publisher, node lifecycle " +
			"controller, ReplicaSet and Deployment controllers, PersistentVolume binder"
	}

	sharedInformers.Start(ctx.Done())
	metadataInformers.Start(ctx.Done())
	close(informersStarted)
	ready.Store(true)
	klog.InfoS("kube-controllers running: " + running)
	<-ctx.Done()
	return nil
}

// startPodControllers: what kube-controller-manager's start functions of these controllers do,
// with its defaults (startServiceAccountController, startRootCACertificatePublisherController
// with the CA from --root-ca-file, startNodeLifecycleController, startReplicaSetController,
// startDeploymentController, startPersistentVolumeBinderController without volume plugins: it
// binds claims to the volumes made for them, and provisions, recycles and deletes none).
func startPodControllers(ctx context.Context, kubeconfig, rootCAFile string,
	informers informers.SharedInformerFactory) error {
	rootCA, err := os.ReadFile(rootCAFile)
	if err != nil {
		return fmt.Errorf("the root CA could not be read: %w", err)
	}
	client := func(agent string) (*kubernetes.Clientset, error) {
		typed, _, err := clients(kubeconfig, agent, 1, 1)
		return typed, err
	}
	core, apps := informers.Core().V1(), informers.Apps().V1()
	starts := []struct {
		agent string
		start func(*kubernetes.Clientset) error
	}{
		{"service-account-controller", func(c *kubernetes.Clientset) error {
			accounts, err := serviceaccountcontroller.NewServiceAccountsController(
				core.ServiceAccounts(), core.Namespaces(), c,
				serviceaccountcontroller.DefaultServiceAccountsControllerOptions())
			if err == nil {
				go accounts.Run(ctx, 1)
			}
			return err
		}},
		{"root-ca-cert-publisher", func(c *kubernetes.Clientset) error {
			publisher, err := rootcacertpublisher.NewPublisher(
				core.ConfigMaps(), core.Namespaces(), c, rootCA)
			if err == nil {
				go publisher.Run(ctx, 1)
			}
			return err
		}},
		{"node-controller", func(c *kubernetes.Clientset) error {
			lifecycle, err := lifecyclecontroller.NewNodeLifecycleController(ctx,
				informers.Coordination().V1().Leases(), core.Pods(), core.Nodes(),
				apps.DaemonSets(), c, nodeMonitorPeriod, nodeStartupGrace, nodeMonitorGrace,
				evictionRate, secondaryEvictionRate, largeClusterSize, unhealthyZoneShare)
			if err == nil {
				go lifecycle.Run(ctx)
			}
			return err
		}},
		{"replicaset-controller", func(c *kubernetes.Clientset) error {
			go replicaset.NewReplicaSetController(ctx, apps.ReplicaSets(), core.Pods(), c,
				replicaset.BurstReplicas).Run(ctx, replicaSetWorkers)
			return nil
		}},
		{"deployment-controller", func(c *kubernetes.Clientset) error {
			deployments, err := deployment.NewDeploymentController(ctx, apps.Deployments(),
				apps.ReplicaSets(), core.Pods(), c)
			if err == nil {
				go deployments.Run(ctx, deploymentWorkers)
			}
			return err
		}},
		{"persistent-volume-binder", func(c *kubernetes.Clientset) error {
			binder, err := persistentvolume.NewController(ctx, persistentvolume.ControllerParameters{
				KubeClient:     c,
				SyncPeriod:     claimSyncPeriod,
				VolumeInformer: core.PersistentVolumes(),
				ClaimInformer:  core.PersistentVolumeClaims(),
				ClassInformer:  informers.Storage().V1().StorageClasses(),
				PodInformer:    core.Pods(),
				NodeInformer:   core.Nodes(),
			})
			if err == nil {
				go binder.Run(ctx)
			}
			return err
		}},
	}
	for _, controller := range starts {
		c, err := client(controller.agent)
		if err != nil {
			return err
		}
		if err := controller.start(c); err != nil {
			return fmt.Errorf("%s could not start: %w", controller.agent, err)
		}
	}
	return nil
}
