// k8scheck decodes every object of the given YAML files into its real Go API type, strictly: an unknown or
// misspelt field, a wrong type or an unknown kind is an error. Chaos Mesh Workflows also go through Chaos
// Mesh's own admission defaulting and validation (the webhook a cluster runs: entry and children exist, names
// are unique, each template's chaos spec is valid). diloco-chaos's tests run it on every exported scenario.
//
// Usage: k8scheck FILE.yaml...   (exit 0: every object is valid; 1: the errors, one per line; 2: usage)
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"

	chaosv1 "github.com/chaos-mesh/chaos-mesh/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The kinds diloco-chaos exports, by apiVersion and kind.
var types = map[string]func() any{
	"v1/ConfigMap":                      func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                         func() any { return &corev1.Secret{} },
	"v1/Service":                        func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                 func() any { return &corev1.ServiceAccount{} },
	"rbac.authorization.k8s.io/v1/Role": func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding": func() any { return &rbacv1.RoleBinding{} },
	"apps/v1/StatefulSet":                      func() any { return &appsv1.StatefulSet{} },
	"chaos-mesh.org/v1alpha1/Workflow":         func() any { return &chaosv1.Workflow{} },
	"chaos-mesh.org/v1alpha1/WorkflowNode":     func() any { return &chaosv1.WorkflowNode{} },
	"chaos-mesh.org/v1alpha1/PodChaos":         func() any { return &chaosv1.PodChaos{} },
	"chaos-mesh.org/v1alpha1/NetworkChaos":     func() any { return &chaosv1.NetworkChaos{} },
	"chaos-mesh.org/v1alpha1/StressChaos":      func() any { return &chaosv1.StressChaos{} },
}

var separator = regexp.MustCompile(`(?m)^---\s*$`)

func check(doc []byte) (string, error) {
	var meta metav1.TypeMeta
	var named struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return "", fmt.Errorf("not a Kubernetes object: %v", err)
	}
	_ = yaml.Unmarshal(doc, &named)
	key := meta.APIVersion + "/" + meta.Kind
	what := fmt.Sprintf("%s %q", key, named.Metadata.Name)
	make, ok := types[key]
	if !ok {
		return what, fmt.Errorf("unknown apiVersion/kind %s", key)
	}
	obj := make()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return what, err
	}
	if w, ok := obj.(*chaosv1.Workflow); ok {
		ctx := context.Background()
		if err := w.Default(ctx, w); err != nil {
			return what, fmt.Errorf("Chaos Mesh defaulting: %v", err)
		}
		if _, err := w.ValidateCreate(ctx, w); err != nil {
			return what, fmt.Errorf("Chaos Mesh validation: %v", err)
		}
	}
	return what, nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: k8scheck FILE.yaml...")
		os.Exit(2)
	}
	failed, count := 0, 0
	for _, path := range os.Args[1:] {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Printf("%s: %v\n", path, err)
			failed++
			continue
		}
		for i, doc := range separator.Split(string(data), -1) {
			if len(bytes.TrimSpace([]byte(doc))) == 0 {
				continue
			}
			count++
			if what, err := check([]byte(doc)); err != nil {
				fmt.Printf("%s: document %d (%s): %v\n", path, i+1, what, err)
				failed++
			}
		}
	}
	if failed > 0 {
		os.Exit(1)
	}
	fmt.Printf("ok: %d objects\n", count)
}
