module github.com/dohfwd/dohfwd/deploy/manifestcheck

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	k8s.io/api v0.37.2 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
