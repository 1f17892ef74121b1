package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/e2e"
	"github.com/stickydrain/stickydrain/test/testbin"
)

const benchNS = "bench"

// benchPod is a realistic opted-in pod: an application with probes,
// environment and resources, a log shipper and a metrics exporter.
func benchPod(name string) *corev1.Pod {
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: benchNS,
			// Its own label opts it in: a Namespace's opt-in reaches only
			// pods of a ReplicaSet or StatefulSet, and a bench pod has no
			// controller (an owner reference to none would have the garbage
			// collector deleting pods during the measurement).
			Labels: map[string]string{"app": "shop", "pod-template-hash": "7d9c5b8f4", "version": "v42", "stickydrain.io/drain": "enabled"},
			Annotations: map[string]string{
				"stickydrain.io/url": "http://localhost:8080/manager/text/list", "stickydrain.io/format": "tomcat-list",
				"stickydrain.io/context": "/shop", "stickydrain.io/basic-auth-env": "TOMCAT_MANAGER_CREDENTIALS",
				"prometheus.io/scrape": "true",
			},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{
					Name: "tomcat", Image: "registry.example.com/shop/tomcat:10.1.33-v42",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "jmx", ContainerPort: 9010}},
					Env: []corev1.EnvVar{
						{Name: "JAVA_OPTS", Value: "-XX:MaxRAMPercentage=75 -Djava.security.egd=file:/dev/urandom"},
						{Name: "TOMCAT_MANAGER_CREDENTIALS", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
							LocalObjectReference: corev1.LocalObjectReference{Name: "tomcat-manager"}, Key: "credentials"}}},
						{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/shop/health", Port: intstr.FromString("http")}}, PeriodSeconds: 5},
					LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}, PeriodSeconds: 10},
					Resources:      res,
					VolumeMounts:   []corev1.VolumeMount{{Name: "logs", MountPath: "/usr/local/tomcat/logs"}},
				},
				{
					Name: "log-shipper", Image: "registry.example.com/fluent-bit:3.2.4",
					Args:         []string{"-c", "/fluent-bit/etc/fluent-bit.conf"},
					VolumeMounts: []corev1.VolumeMount{{Name: "logs", MountPath: "/logs", ReadOnly: true}},
					Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
				},
				{
					Name: "jmx-exporter", Image: "registry.example.com/jmx-exporter:1.1.0",
					Ports:     []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9404}},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
				},
			},
			Volumes: []corev1.Volume{{Name: "logs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

func reviewBody(uid int64) ([]byte, error) {
	pod, err := json.Marshal(benchPod(""))
	if err != nil {
		return nil, err
	}
	return json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID(fmt.Sprintf("bench-%d", uid)),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: benchNS, Operation: admissionv1.Create,
			UserInfo: authUser(),
			Object:   runtime.RawExtension{Raw: pod},
		},
	})
}

func admission(ctx context.Context, dir string, logf func(string, ...any), sz size, pprofAddr string) (string, error) {
	dur := sz.AdmissionRun
	c, err := cluster.Start(ctx, cluster.Options{Log: logf, OwnSignals: true})
	if err != nil {
		return "", err
	}
	defer c.Stop()
	bins := testbin.New()
	defer bins.Close()
	bin, err := bins.Build("github.com/stickydrain/stickydrain/webhook")
	if err != nil {
		return "", err
	}
	kubeconfig, err := e2e.ServiceAccount(ctx, c, "webhook")
	if err != nil {
		return "", err
	}
	var extra []string
	if pprofAddr != "" {
		extra = append(extra, "--pprof-bind-address", pprofAddr)
	}
	w, err := e2e.StartWebhook(ctx, bin, kubeconfig, dir, e2e.DrainctlImage, extra...)
	if err != nil {
		return "", err
	}
	defer w.Stop()
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: benchNS, Labels: map[string]string{"stickydrain.io/drain": "enabled"},
		Annotations: map[string]string{"stickydrain.io/max-wait": "2h"},
	}}); err != nil {
		return "", err
	}
	base := fmt.Sprintf("https://127.0.0.1:%d", w.Port)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.CA)
	// As kube-apiserver calls webhooks: HTTP/2 when the server offers it
	// (it does), so a few long-lived connections carry every review.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64,
	}}
	url := base + "/mutate--v1-pod"
	// One body, its UID rewritten per request: the generator's own cost
	// stays small beside the webhook's on the shared 2 cores.
	tmpl, err := reviewBody(0)
	if err != nil {
		return "", err
	}
	var uid atomic.Int64
	var proto atomic.Value
	post := func() error {
		body := bytes.Replace(tmpl, []byte(`"bench-0"`), fmt.Appendf(nil, `"bench-%d"`, uid.Add(1)), 1)
		resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
		if err == nil {
			proto.Store(resp.Proto)
		}
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		var rev admissionv1.AdmissionReview
		if err := json.Unmarshal(b, &rev); err != nil {
			return fmt.Errorf("status %d: %w", resp.StatusCode, err)
		}
		if rev.Response == nil || !rev.Response.Allowed || len(rev.Response.Patch) == 0 {
			return fmt.Errorf("not mutated: %s", b)
		}
		return nil
	}
	// The webhook's Namespace cache is warm once one review is answered.
	deadline := time.Now().Add(30 * time.Second)
	for err := post(); err != nil; err = post() {
		if time.Now().After(deadline) {
			return "", fmt.Errorf("webhook never answered: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	logf("warming up (%v)", proto.Load())
	if _, err := openLoop(ctx, post, 200, 3*time.Second); err != nil {
		return "", err
	}

	t := table{head: []string{"load", "requests", "throughput", "p50", "p99", "p99.9", "max", "errors", "webhook CPU", "webhook RSS (peak)", "CPU stolen by the host", "p99 of each run"}}
	// run measures f repeats times and reports the run with the median p99
	// beside every run's p99 and the host's steal: on a shared virtual
	// machine one run's tail can be another tenant's.
	run := func(label string, repeats int, f func() (runResult, error)) error {
		type measured struct {
			d             dist
			r             runResult
			before, after usage
			steal         float64
		}
		var runs []measured
		for k := range repeats {
			logf("admission: %s (%d of %d)", label, k+1, repeats)
			before, err := procUsage(w.Pid())
			if err != nil {
				return err
			}
			s0, err := readCPUStat()
			if err != nil {
				return err
			}
			r, err := f()
			if err != nil {
				return err
			}
			s1, err := readCPUStat()
			if err != nil {
				return err
			}
			after, err := procUsage(w.Pid())
			if err != nil {
				return err
			}
			runs = append(runs, measured{summarise(r.lat), r, before, after, s1.stealSince(s0)})
		}
		slices.SortFunc(runs, func(a, b measured) int { return cmp.Compare(a.d.P99, b.d.P99) })
		var each []string
		for _, m := range runs {
			each = append(each, ms(m.d.P99))
		}
		m := runs[len(runs)/2]
		d := m.d
		t.add(label, fmt.Sprint(d.N), fmt.Sprintf("%.0f/s", float64(d.N)/m.r.wall.Seconds()), ms(d.P50), ms(d.P99), ms(d.P999), ms(d.Max),
			fmt.Sprint(m.r.errors), fmt.Sprintf("%.0f %% of a core", 100*float64(m.after.CPU-m.before.CPU)/float64(m.r.wall)),
			fmt.Sprintf("%s (%s)", mib(m.after.RSS), mib(m.after.HWM)), fmt.Sprintf("%.1f %%", 100*m.steal), strings.Join(each, ", "))
		return nil
	}
	for _, rate := range []int{100, 500, 1000} {
		if err := run(fmt.Sprintf("%d/s fixed", rate), 3, func() (runResult, error) {
			if pprofAddr != "" && rate == 1000 {
				go profile(pprofAddr, dur, fmt.Sprintf("bench/webhook-cpu-%d.prof", rate))
			}
			return openLoop(ctx, post, rate, dur)
		}); err != nil {
			return "", err
		}
	}
	for _, workers := range []int{8, 64} {
		if err := run(fmt.Sprintf("saturation, %d clients", workers), 1, func() (runResult, error) { return closedLoop(ctx, post, workers, dur) }); err != nil {
			return "", err
		}
	}

	// Through the kube-apiserver: pod creates with and without the webhook.
	logf("admission: pod creates through the API server")
	pc := table{head: []string{"pod CREATE through kube-apiserver", "pods", "p50", "p99", "max"}}
	creates := func(label, prefix string) error {
		var lat []time.Duration
		for i := range sz.AdmissionCreates {
			p := benchPod(fmt.Sprintf("%s-%d", prefix, i))
			p.ResourceVersion = ""
			start := time.Now()
			if err := c.Client.Create(ctx, p); err != nil {
				return fmt.Errorf("%s: creating pod: %w", label, err)
			}
			lat = append(lat, time.Since(start))
			if i == 0 && label == "with the webhook" && p.Annotations["stickydrain.io/status"] != "injected" {
				return errors.New("the pod created through the API server was not mutated")
			}
		}
		d := summarise(lat)
		pc.add(label, fmt.Sprint(d.N), ms(d.P50), ms(d.P99), ms(d.Max))
		return nil
	}
	if err := e2e.InstallWebhookConfigurations(ctx, c, base, w.CA); err != nil {
		return "", err
	}
	time.Sleep(2 * time.Second) // the API server picks up the configurations
	if err := creates("with the webhook", "with"); err != nil {
		return "", err
	}
	if err := c.Client.DeleteAllOf(ctx, &admissionregv1.MutatingWebhookConfiguration{}); err != nil {
		return "", err
	}
	if err := c.Client.DeleteAllOf(ctx, &admissionregv1.ValidatingWebhookConfiguration{}); err != nil {
		return "", err
	}
	time.Sleep(2 * time.Second)
	if err := creates("without (no webhook configuration)", "without"); err != nil {
		return "", err
	}
	_ = c.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(benchNS), client.GracePeriodSeconds(0))

	return fmt.Sprintf(`## Admission

The webhook binary (TLS, certificate from certs/, the Namespace read through its cache as its
shipped ServiceAccount), sent AdmissionReviews over HTTP/2 (as kube-apiserver sends them) of an opted-in pod with 3 containers by a load
generator in the same 2-core machine (so the generator's CPU is taken from the webhook's). Fixed
rates are open-loop: each latency runs from the request's scheduled send time, so a stall is
not hidden. %v per run; each fixed rate runs three times and the row is the run with the median
p99 (every run's p99 in the last column). "Stolen" is the machine's CPU time the hypervisor gave
to other guests during that run (/proc/stat steal), which shows up in the tail.

%s
Goal: p99 under 5 ms at 500 admissions/s.

%s
`, dur, t.String(), pc.String()), nil
}

type runResult struct {
	lat    []time.Duration
	errors int
	wall   time.Duration
}

// openLoop sends rate requests a second for d, each at its scheduled time
// whatever the previous ones do.
func openLoop(ctx context.Context, post func() error, rate int, d time.Duration) (runResult, error) {
	n := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	var (
		mu  sync.Mutex
		res runResult
		wg  sync.WaitGroup
	)
	res.lat = make([]time.Duration, 0, n)
	sem := make(chan struct{}, 4096)
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := post()
			l := time.Since(due)
			<-sem
			mu.Lock()
			res.lat = append(res.lat, l)
			if err != nil {
				res.errors++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.wall = time.Since(start)
	if res.errors > 0 {
		return res, fmt.Errorf("%d of %d admissions failed", res.errors, n)
	}
	return res, ctx.Err()
}

// closedLoop runs workers that each send the next request as soon as the
// last is answered, for d: the webhook's saturation throughput.
func closedLoop(ctx context.Context, post func() error, workers int, d time.Duration) (runResult, error) {
	var (
		mu  sync.Mutex
		res runResult
		wg  sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				t0 := time.Now()
				err := post()
				l := time.Since(t0)
				mu.Lock()
				res.lat = append(res.lat, l)
				if err != nil {
					res.errors++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.wall = time.Since(start)
	if res.errors > 0 {
		return res, fmt.Errorf("%d of %d admissions failed", res.errors, len(res.lat))
	}
	return res, ctx.Err()
}

func authUser() authenticationv1.UserInfo {
	return authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:replicaset-controller", Groups: []string{"system:serviceaccounts", "system:authenticated"}}
}

// profile saves the webhook's CPU profile over d (go tool pprof FILE).
func profile(addr string, d time.Duration, file string) {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())))
	if err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	_ = os.WriteFile(file, b, 0o644)
}
