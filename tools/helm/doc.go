// Package helm holds the tests of the Helm chart in charts/stickydrain,
// written with Helm's Go SDK (a module of its own, so that Helm and its
// dependencies stay out of the main go.mod).
package helm
