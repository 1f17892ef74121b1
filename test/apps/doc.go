// Package apps holds the tests that run drainctl against the application
// servers teams run — Debian's Tomcat 10.1 with its manager, PHP 8.2 with
// file sessions and no php.ini, Node with express-session from npm — each
// configured as docs/opting-in.md shows, with probes hitting it the whole
// time (make test-apps).
package apps
