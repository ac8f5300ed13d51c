package sdk_test

import (
	"context"
	"fmt"
	"log"

	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/topics"
)

func ExampleNotificationID() {
	id, err := sdk.NotificationID("invoice.paid", "u_8831", sdk.Key{"invoice": sdk.String("inv_2201")})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id)
	// Output: 52f364d9288c640b306b566e509104bd
}

func ExampleDeriveID() {
	// A dedupeKey wins over an idempotencyKey, which wins over a key.
	id, source, _ := sdk.DeriveID("acme", "invoice.paid", "u_8831", nil, "inv_2201", "retry-1")
	fmt.Println(id, source)
	id, source, _ = sdk.DeriveID("acme", "invoice.paid", "u_8831", sdk.Key{"invoice": sdk.String("inv_2201")}, "", "")
	fmt.Println(id, source)
	// Output:
	// e7c5628525bf71eaa5d0704776d9698e dedupe_key
	// 52f364d9288c640b306b566e509104bd key
}

func ExampleClient_Send() {
	c := sdk.NewClient("http://127.0.0.1:8080", "herald-dev-key")
	res, err := c.Send(context.Background(), sdk.Notification{
		Type:       "invoice.paid",
		Recipients: []string{"u_8831"},
		Title:      "Invoice paid",
		Body:       "Thanks! Invoice inv_2201 is paid.",
		Key:        sdk.Key{"invoice": sdk.String("inv_2201")},
	})
	if err != nil {
		log.Fatal(err) // *sdk.APIError for an answer; retried already if transient
	}
	for _, n := range res.Notifications {
		fmt.Println(n.Recipient, n.ID, n.Status)
	}
}

func ExampleProducer_Send() {
	p, err := sdk.NewProducer(sdk.ProducerConfig{
		Brokers: []string{"127.0.0.1:9092"},
		Catalog: topics.New(topics.Options{}),
		Tenant:  "acme",
		Name:    "billing",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	reqs, err := p.Send(context.Background(), sdk.Notification{
		Type: "invoice.paid", Recipients: []string{"u_8831"}, Title: "Invoice paid", Body: "Thanks!",
		DedupeKey: "inv_2201",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(reqs[0].NotificationID)
}
