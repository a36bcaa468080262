package config

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/component-base/codec"
	"k8s.io/klog/v2"
	"k8s.io/kube-proxy/config/v1alpha1"
)

// LenientDecodingMessage is logged, as upstream logs it, when a file had
// unknown or duplicate fields and was accepted by the lenient decoder.
const LenientDecodingMessage = "Using lenient decoding as strict decoding failed"

// Decode parses a KubeProxyConfiguration (YAML or JSON, apiVersion
// kubeproxy.config.k8s.io/v1alpha1). It decodes strictly first; when that
// fails only because of unknown or duplicate fields it retries leniently and
// returns the strict error as strictErr, which the caller should log with
// LenientDecodingMessage. Any other problem is returned as err. The result
// is not defaulted.
func Decode(data []byte) (obj *v1alpha1.KubeProxyConfiguration, strictErr, err error) {
	strict, err := newCodecs(serializer.EnableStrict)
	if err != nil {
		return nil, nil, err
	}
	obj, err = decodeWith(strict, data)
	if err == nil {
		return obj, nil, nil
	}
	if !runtime.IsStrictDecodingError(err) {
		return nil, nil, fmt.Errorf("failed to decode: %w", err)
	}
	strictErr = err
	_, lenient, err := codec.NewLenientSchemeAndCodecs(v1alpha1.AddToScheme)
	if err != nil {
		return nil, nil, fmt.Errorf("building lenient decoder: %w", err)
	}
	obj, err = decodeWith(*lenient, data)
	if err != nil {
		// Like upstream, report the strict error: it names the offending field.
		return nil, nil, fmt.Errorf("failed lenient decoding: %w", strictErr)
	}
	return obj, strictErr, nil
}

// Load reads and decodes the file at path, logging the lenient-decoding
// warning when it applies. The result is not defaulted.
func Load(logger klog.Logger, path string) (*v1alpha1.KubeProxyConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	obj, strictErr, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("config file %q: %w", path, err)
	}
	if strictErr != nil {
		logger.Info(LenientDecodingMessage, "err", strictErr)
	}
	return obj, nil
}

// EncodeYAML renders obj as v1alpha1 YAML with apiVersion and kind set, the
// format of --write-config-to.
func EncodeYAML(obj *v1alpha1.KubeProxyConfiguration) ([]byte, error) {
	codecs, err := newCodecs(serializer.EnableStrict)
	if err != nil {
		return nil, err
	}
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeYAML)
	if !ok {
		return nil, fmt.Errorf("no serializer for %s", runtime.ContentTypeYAML)
	}
	encoder := codecs.EncoderForVersion(info.Serializer, v1alpha1.SchemeGroupVersion)
	data, err := runtime.Encode(encoder, obj.DeepCopy())
	if err != nil {
		return nil, fmt.Errorf("encoding KubeProxyConfiguration: %w", err)
	}
	return data, nil
}

func newCodecs(mutators ...serializer.CodecFactoryOptionsMutator) (serializer.CodecFactory, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return serializer.CodecFactory{}, fmt.Errorf("registering v1alpha1: %w", err)
	}
	return serializer.NewCodecFactory(scheme, mutators...), nil
}

func decodeWith(codecs serializer.CodecFactory, data []byte) (*v1alpha1.KubeProxyConfiguration, error) {
	decoded, gvk, err := codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	obj, ok := decoded.(*v1alpha1.KubeProxyConfiguration)
	if !ok {
		return nil, fmt.Errorf("got unexpected config type: %v", gvk)
	}
	return obj, nil
}
